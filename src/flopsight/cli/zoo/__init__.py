"""The zoo: well-known architectures built offline (:mod:`.models`) from their published
configurations (:mod:`.configs`)."""

from .models import *  # noqa: F401,F403  the zoo's API is models.__all__
from .models import __all__  # noqa: F401
