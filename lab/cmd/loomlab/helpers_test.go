package main

import (
	"os"
	"testing"

	"github.com/loomgate/loomgate/sidecar/sidecartest"
)

// loomlabBin is this command, built once per test run: scenarios start their
// stub and sidecar as processes of it (loomlab stub, loomlab proxy).
var loomlabBin = &sidecartest.Binary{Name: "loomlab"}

func TestMain(m *testing.M) {
	code := m.Run()
	loomlabBin.Remove()
	os.Exit(code)
}

func labBinary(t testing.TB) string { return loomlabBin.Path(t) }
