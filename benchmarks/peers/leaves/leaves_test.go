// The Go ML latency ladder's in-process case: leaves (a pure-Go
// reimplementation of XGBoost prediction) predicting one Titanic passenger
// with titanic_v090.xgb, as the published benchmark does
// (PredictSingle(features, 100), raw margin). Run:
//
//	go test -bench . -count 5
//
// benchmarks/scripts/single_row.sh runs it next to wirespeed's own.
package leaves

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/dmitryikh/leaves"
)

// Passenger 904 of test.csv, as go-featureprocessor.json transforms it.
var features = []float64{1, 0, 1, 0.2875, 0.3333333333333333, 0, 0.322667, 0, 1, 0, 0, 0}

func load(b *testing.B) *leaves.Ensemble {
	model, err := leaves.XGEnsembleFromFile("titanic_v090.xgb", false)
	if err != nil {
		b.Fatal(err)
	}
	return model
}

func BenchmarkLeavesTitanicSingleRow(b *testing.B) {
	model := load(b)
	// The reference margin of tests/data/titanic/README.txt.
	if got := model.PredictSingle(features, 100); math.Abs(got-(-0.1843519155)) > 1e-6 {
		b.Fatalf("margin %v, want -0.1843519155", got)
	}
	b.ResetTimer()
	var sink float64
	for i := 0; i < b.N; i++ {
		sink += model.PredictSingle(features, 100)
	}
	_ = sink
}

// The ladder's GoFeatureProcessing_GoLeaves case: passenger 904's raw
// record through go-featureprocessing (go-featureprocessor.json), then
// leaves, with the probability (the sigmoid) as the answer.
func BenchmarkFeatureProcessingLeavesTitanicSingleRow(b *testing.B) {
	model := load(b)
	raw, err := os.ReadFile("../../../tests/data/titanic/go-featureprocessor.json")
	if err != nil {
		b.Fatal(err)
	}
	var transformer PassengerFeatureTransformer
	if err := json.Unmarshal(raw, &transformer); err != nil {
		b.Fatal(err)
	}
	passenger := Passenger{PClass: 1, Sex: "female", Age: 23, SibSp: 1, Parch: 0, Fare: 82.2667, Cabin: "B45", Embarked: "S"}
	features := make([]float64, transformer.NumFeatures())
	transformer.TransformInplace(features, &passenger)
	margin := model.PredictSingle(features, 100)
	if p := 1 / (1 + math.Exp(-margin)); math.Abs(p-0.4540421065) > 1e-6 {
		b.Fatalf("probability %v, want 0.4540421065", p)
	}
	b.ResetTimer()
	var sink float64
	for i := 0; i < b.N; i++ {
		transformer.TransformInplace(features, &passenger)
		sink += 1 / (1 + math.Exp(-model.PredictSingle(features, 100)))
	}
	_ = sink
}
