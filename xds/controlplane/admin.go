package controlplane

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminHandler serves /metrics (Prometheus), /healthz (the process is up), /readyz (a version
// is served and the server is not shutting down) and /config (the served versions and model, as
// JSON), as the enforcer's admin server does.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.mx.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() || s.cur.Load() == nil {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
		r := s.cur.Load()
		versions := map[string]string{}
		for t, tr := range r.byType {
			versions[t] = tr.version
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Version  string            `json:"version"`
			Versions map[string]string `json:"versions"`
			LoadedAt string            `json:"loaded_at"`
			Policies string            `json:"policies"`
			Model    any               `json:"model"`
		}{s.Version(), versions, time.UnixMilli(s.loadedAt.Load()).UTC().Format(time.RFC3339Nano),
			s.conf.PolicyDir, r.model})
	})
	return mux
}
