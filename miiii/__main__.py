from miiii.cli import main

raise SystemExit(main())
