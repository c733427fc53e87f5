from scheduler.tools.cli import run

run()
