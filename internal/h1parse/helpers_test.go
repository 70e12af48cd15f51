package h1parse

import (
	"bufio"
	"strings"
)

func bufioString(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }
