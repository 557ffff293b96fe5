package sidecar

import (
	_ "embed"
	"net/http"
)

// statusPage is the admin listener's front page: one self-contained file,
// no build step and nothing fetched from elsewhere, so that it works in a
// cluster with no way out. It polls /advice, which has everything it shows.
//
//go:embed status.html
var statusPage []byte

func serveStatusPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The page runs only its own inline script and talks only to this
	// listener.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:")
	w.Write(statusPage)
}
