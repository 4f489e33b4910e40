"""Training the built-in models: the loop, the generated tasks and stories, the command line."""
