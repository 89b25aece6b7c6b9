package session

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	executions   *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	sandboxStart prometheus.Histogram
	startPhase   *prometheus.HistogramVec // by phase of sandboxStart
	poolHits     prometheus.Counter
	poolMisses   prometheus.Counter

	pauses, resumes             *prometheus.CounterVec // by result
	moves                       *prometheus.CounterVec // by direction: in, out
	pauseSeconds, resumeSeconds prometheus.Histogram

	// By tenant: the operator's names of API keys, so a bounded set ("" without keys).
	sessionsCreated *prometheus.CounterVec
	runs            *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, m *Manager) *metrics {
	mt := &metrics{
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellbox_executions_total",
			Help: "Executions (kind=execute) and commands (kind=command) by result status.",
		}, []string{"kind", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cellbox_execution_duration_seconds",
			Help:    "Wall time of executions and commands inside the sandbox.",
			Buckets: []float64{.001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"kind"}),
		sandboxStart: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cellbox_sandbox_start_seconds",
			Help:    "Time from asking for a sandbox to its kernel being ready (pre-imports done).",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 10),
		}),
		startPhase: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cellbox_sandbox_start_phase_seconds",
			Help:    "Time of each phase of a sandbox's start: workspace (its image made and mounted; not for a session's own workspace), runtime (the backend's create: the runtime's start and the guest listening), connect (the guest's hello), configure (the kernel started, pre-imports done).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"phase"}),
		poolHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cellbox_pool_hits_total", Help: "Sessions and one-shots served from the warm pool.",
		}),
		poolMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cellbox_pool_misses_total", Help: "Sessions and one-shots with default limits and no env that had to start a sandbox (their image's pool empty, or none).",
		}),
		pauses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellbox_session_pauses_total", Help: "Pauses of sessions by result: paused, refused (the paused sessions' disk quota), failed.",
		}, []string{"result"}),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellbox_session_resumes_total", Help: "Resumes of paused sessions by result: resumed, failed.",
		}, []string{"result"}),
		pauseSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cellbox_session_pause_seconds", Help: "Time to pause a session: its sandbox written to disk and stopped.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 10),
		}),
		resumeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cellbox_session_resume_seconds", Help: "Time to resume a paused session: its sandbox restored and its guest reached.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 10),
		}),
		sessionsCreated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellbox_sessions_created_total",
			Help: "Sessions created, by tenant (the name of an API key; empty without keys).",
		}, []string{"tenant"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellbox_tenant_executions_total",
			Help: "Executions (kind=execute, one-shots included) and commands (kind=command) started, by tenant.",
		}, []string{"tenant", "kind"}),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellbox_session_moves_total", Help: "Sessions moved between cluster nodes, by direction: in (to this node), out (from it).",
		}, []string{"direction"}),
	}
	if reg == nil {
		return mt
	}
	reg.MustRegister(mt.executions, mt.duration, mt.sandboxStart, mt.startPhase, mt.poolHits, mt.poolMisses, mt.sessionsCreated, mt.runs,
		mt.pauses, mt.resumes, mt.moves, mt.pauseSeconds, mt.resumeSeconds,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cellbox_paused_bytes", Help: "Disk the paused sessions' checkpoints take."},
			func() float64 { return float64(m.pausedBytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cellbox_sessions", Help: "Live sessions."},
			func() float64 { n, _ := m.Stats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cellbox_pool_size", Help: "Warm sandboxes ready, of every image."},
			func() float64 { _, n := m.Stats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cellbox_pool_target",
			Help: "Warm sandboxes the pools fill to, of every image: each pool's size, or more after a burst of sessions (--pool-max)."},
			func() float64 { return float64(m.poolTarget()) }),
	)
	// By image, and by language: only those with a pool (--pool-size, --image-pools,
	// --language-pools), so a bounded set.
	for k, p := range m.pools {
		if k.language != "" {
			labels := prometheus.Labels{"language": k.language}
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cellbox_language_pool_size",
				Help: "Warm sandboxes of the default image with a language's kernel running, by language.", ConstLabels: labels},
				func() float64 { return float64(p.len()) }),
				prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cellbox_language_pool_target",
					Help: "Warm sandboxes a language's pool fills to, by language.", ConstLabels: labels},
					func() float64 { return float64(p.size()) }))
			continue
		}
		labels := prometheus.Labels{"image": k.image}
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cellbox_image_pool_size",
			Help: "Warm sandboxes ready, by image (empty: the host's root).", ConstLabels: labels},
			func() float64 { return float64(p.len()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cellbox_image_pool_target",
				Help: "Warm sandboxes an image's pool fills to, by image (empty: the host's root).", ConstLabels: labels},
				func() float64 { return float64(p.size()) }))
	}
	return mt
}

func (mt *metrics) observe(kind, status string, d time.Duration) {
	mt.executions.WithLabelValues(kind, status).Inc()
	mt.duration.WithLabelValues(kind).Observe(d.Seconds())
}
