from atoll.cli import main

raise SystemExit(main())
