"""gpulab's command line client (`gpulab`): the REST API for a terminal. See __main__."""
