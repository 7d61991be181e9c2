from numpy.random import *  # noqa: F401,F403
