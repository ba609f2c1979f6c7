from ckptspec.cli import main

main()
