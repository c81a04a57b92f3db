package testenv

import (
	"os"
	"os/exec"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Child returns a command that runs this test binary again with only the
// named test, verbose, and env added to the environment. The named test
// is the child's body: it does nothing unless it finds its variables, and
// the parent kills it, measures it or reads its output. Extra flags (a CPU
// profile) can be appended to the command's Args.
func Child(test string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// Counter sums the counter name in g over the series that carry every
// label pair given (name, value, name, value, ...); with none, over all.
func Counter(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("Counter(%s): labels come in name, value pairs", name)
	}
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
