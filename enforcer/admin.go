package enforcer

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminHandler serves /metrics (Prometheus), /healthz (the process is up), /readyz (a config
// is loaded and the enforcer is not shutting down) and /config (the serving snapshot's
// version and model, as JSON).
func (e *Enforcer) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(e.mx.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !e.ready.Load() || e.cfg.Load() == nil {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
		c := e.cfg.Load()
		if c == nil {
			http.Error(w, "no config yet: waiting for the first snapshot from --xds", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Version  string `json:"version"`
			LoadedAt string `json:"loaded_at"`
			Rules    int    `json:"rules"`
			Instance string `json:"instance"`
			Breaker  string `json:"breaker"`
			Model    any    `json:"model"`
		}{c.version, time.UnixMilli(e.loadedAt.Load()).UTC().Format(time.RFC3339Nano), c.rules,
			e.conf.InstanceID, e.BreakerState().String(), c.model})
	})
	return mux
}
