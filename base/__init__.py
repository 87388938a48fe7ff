"""The ground floor: what every package may import (errors a user can cause, file helpers, text
safe for a terminal). It imports no other package of the project."""
