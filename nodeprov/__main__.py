from nodeprov.cli import main

main()
