"""The ground floor (package base/; not the base model, the `base` setting trainer.models loads): what
every package may import (errors a user can cause, file helpers, text
safe for a terminal, the objective J = P − λ·C and the one paired-resampling routine). It imports
no other package of the project."""
