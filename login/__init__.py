"""What the login-node shell scripts run in Python (jobs/submit.sh, container/*.sh), as small modules.

They run with the host's python3 before anything is queued or built, where torch may be missing: nothing
here imports torch at module level (a module that needs it imports it where it is used and says what it
could not check without it). Each is `python3 -m login.NAME ...` from the project (PYTHONPATH=project);
the scripts call them, the tests call their functions. Not part of the installed package (train*).
"""
