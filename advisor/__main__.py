from .cli import entry

if __name__ == "__main__":  # not when a spawned worker process imports the main module (advisor.tasks)
    entry()
