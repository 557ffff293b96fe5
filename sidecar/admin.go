package sidecar

import (
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminHandler serves the admin listener. It is plain net/http, apart from
// the traffic path, and never subject to admission: when traffic saturates
// is exactly when an operator needs it.
func (s *Sidecar) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{
		// Native histograms travel only in the protobuf format, which
		// Prometheus asks for when it wants them.
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !s.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("draining\n"))
			return
		}
		if ok, why := s.health.Ready(r.Context()); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(why + "\n"))
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /advice", s.serveAdvice)
	mux.HandleFunc("GET /{$}", serveStatusPage)
	if s.cfg.Pprof {
		mux.Handle("/debug/pprof/", loopbackOnly(http.HandlerFunc(pprof.Index)))
		mux.Handle("/debug/pprof/cmdline", loopbackOnly(http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("/debug/pprof/profile", loopbackOnly(http.HandlerFunc(pprof.Profile)))
		mux.Handle("/debug/pprof/symbol", loopbackOnly(http.HandlerFunc(pprof.Symbol)))
		mux.Handle("/debug/pprof/trace", loopbackOnly(http.HandlerFunc(pprof.Trace)))
	}
	return mux
}

// loopbackOnly serves h to clients on loopback and 403 to others. The
// admin listener is on every interface by default, for Prometheus and the
// probes; pprof's profiles and command line must not be, and
// kubectl port-forward, the way in to a pod, arrives on loopback.
func loopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip, perr := netip.ParseAddr(host); err != nil || perr != nil || !ip.Unmap().IsLoopback() {
			http.Error(w, "pprof answers only clients on loopback: use kubectl port-forward or a shell in the pod", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
