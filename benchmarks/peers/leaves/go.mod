module wirespeed/benchmarks/peers/leaves

go 1.21

require (
	github.com/dmitryikh/leaves v0.0.0-20230708180554-25d19a787328
	github.com/nikolaydubina/go-featureprocessing v1.0.1
)
