//go:build !race

package rawio

func beforeWrite() {}
func afterRead()   {}
