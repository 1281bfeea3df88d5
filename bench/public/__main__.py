from bench.public.run import main

main()
