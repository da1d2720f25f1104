package cmd

import (
	"bytes"
	"io"
	"strings"
)

func stringsReader(s string) io.Reader { return strings.NewReader(s) }
func bytesReader(b []byte) io.Reader   { return bytes.NewReader(b) }
