from zerolab.cli.main import main

raise SystemExit(main())
