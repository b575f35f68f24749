module wirespeed/benchmarks/peers/leaves

go 1.21

require (
	github.com/dmitryikh/leaves v0.0.0-20230708180554-25d19a787328
	github.com/google/gofuzz v1.2.0
	github.com/nikolaydubina/go-featureprocessing v1.0.1
	github.com/stretchr/testify v1.7.0
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	gopkg.in/yaml.v3 v3.0.0-20200313102051-9f266ea9e77c // indirect
)
