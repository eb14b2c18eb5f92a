from paymanager.cli import main

main()
