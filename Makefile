# make help: what each target does.
.PHONY: help serve test check latency wrk

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

serve: ## Build and serve the bundled demo models on 127.0.0.1:8000
	cargo run --release -p wirespeed -- serve

test: ## Run every test (the same command CI runs)
	./scripts/test

check: ## Validate the bundled model repository
	cargo run --release -p wirespeed -- serve --check

latency: ## Single-client closed-loop latency against a running server
	cargo run --release -p wirespeed-server --example rest_latency -- 127.0.0.1:8000 10000 1

wrk: ## wrk throughput against a running server (apt-get install wrk)
	wrk -t1 -c32 -d15s --latency -s benchmarks/wrk/titanic_infer.lua http://127.0.0.1:8000
