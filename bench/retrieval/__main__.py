from bench.retrieval.run import main

main()
