"""The ground floor: what every package may import (errors a user can cause, file helpers, text
safe for a terminal, the objective J = P − λ·C and the one paired-difference routine). It imports
no other package of the project."""
