package supervise

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metrics is what --metrics-file reports about one run.
type metrics struct {
	lock               string
	exitCode           int
	duration, wait     time.Duration
	renewals, failures int
	lost               bool
	deadlineExceeded   bool
	token              uint64
	// --once: whether the run recorded a completion or skipped a done job,
	// and the finish time of the job's record it wrote or found.
	once, completed, skipped bool
	lastCompletion           time.Time
}

const (
	lastSuccessName    = "fence_run_last_success_timestamp_seconds"
	lastCompletionName = "fence_lock_last_completion_timestamp_seconds"
)

// writeMetrics writes m to path as a Prometheus textfile (for the
// node_exporter textfile collector), atomically: a temporary file in the
// same directory, renamed over path. The file is world-readable (0644), as
// the exporter usually runs as another user. A run that failed carries over
// fence_run_last_success_timestamp_seconds from the file it replaces.
func writeMetrics(path string, m *metrics) error {
	reg := prometheus.NewRegistry()
	lock := prometheus.Labels{"lock": m.lock}
	var err error // the first registration refused
	gauge := func(name, help string, v float64) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: lock})
		g.Set(v)
		err = cmp.Or(err, reg.Register(g))
	}
	counter := func(name, help string, v int) {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: lock})
		c.Add(float64(v))
		err = cmp.Or(err, reg.Register(c))
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge("fence_run_exit_code", "Exit code of the last fence run.", float64(m.exitCode))
	gauge("fence_run_duration_seconds", "How long the command ran.", m.duration.Seconds())
	gauge("fence_lease_acquire_wait_seconds", "How long fence waited for the lock.", m.wait.Seconds())
	counter("fence_lease_renewals_total", "Acknowledged lease renewals during the run.", m.renewals)
	counter("fence_lease_renewal_failures_total", "Failed lease renewal attempts during the run.", m.failures)
	gauge("fence_lease_lost", "1 if the lease was lost or became unsafe and the command was stopped.", b2f(m.lost))
	gauge("fence_run_deadline_exceeded", "1 if the command was stopped at its deadline.", b2f(m.deadlineExceeded))
	gauge("fence_lease_token", "Fencing token of the run's lease (0 if none was acquired).", float64(m.token))
	var last float64
	if m.exitCode == 0 {
		last = float64(time.Now().UnixNano()) / 1e9
	} else {
		last = previousGauge(path, lastSuccessName, m.lock)
	}
	if last > 0 {
		gauge(lastSuccessName, "Unix time of the last successful fence run.", last)
	}
	if m.once {
		gauge("fence_run_once_completed", "1 if the run's command succeeded and its --once completion was recorded.", b2f(m.completed))
		gauge("fence_run_once_skipped", "1 if the run found its --once key done already and ran nothing.", b2f(m.skipped))
		lastDone := previousGauge(path, lastCompletionName, m.lock)
		if !m.lastCompletion.IsZero() {
			lastDone = max(lastDone, float64(m.lastCompletion.UnixNano())/1e9)
		}
		if lastDone > 0 {
			gauge(lastCompletionName, "Unix time of the last recorded --once completion of the lock known to this file.", lastDone)
		}
	}
	if err == nil {
		err = prometheus.WriteToTextfile(path, reg)
	}
	if err != nil {
		return fmt.Errorf("write metrics file %s: %w", path, err)
	}
	return nil
}

// previousGauge reads the gauge name of lock (a timestamp carried over) from
// an earlier metrics file at path (0 if there is none).
func previousGauge(path, name, lock string) float64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(f)
	if err != nil {
		return 0
	}
	fam := fams[name]
	if fam == nil {
		return 0
	}
	ofLock := func(l *dto.LabelPair) bool { return l.GetName() == "lock" && l.GetValue() == lock }
	for _, m := range fam.GetMetric() {
		if m.GetGauge() != nil && slices.ContainsFunc(m.GetLabel(), ofLock) {
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
