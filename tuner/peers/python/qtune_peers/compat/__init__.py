"""Stand-ins for small dependencies of peers that the users' Python may lack; a folder put at the END of sys.path
only when the real package is missing, so an installed one always wins."""
