package leaves

// Passenger is one Titanic record, with the go-featureprocessing transform of
// each field named in its tag, as the Go ML latency ladder declares it. The
// transformer is generated (not committed): benchmarks/scripts/single_row.sh
// runs `go generate` first.
//
//go:generate go run github.com/nikolaydubina/go-featureprocessing/cmd/generate -struct=Passenger
type Passenger struct {
	PClass   float64 `feature:"identity"`
	Sex      string  `feature:"onehot"`
	Age      float64 `feature:"minmax"`
	SibSp    float64 `feature:"quantile"`
	Parch    float64 `feature:"identity"`
	Fare     float64 `feature:"standard"`
	Cabin    string  `feature:"ordinal"`
	Embarked string  `feature:"onehot"`
}
