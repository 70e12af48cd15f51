package localmode

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseTCPPorts parses a --tcp-ports value, a comma-separated list of
// ports 1-65535 (spaces around each allowed), and returns have with them
// appended. A port given twice (here or in have), 80 (redirected to the
// plain listener already), 443 (interception) and 53 (the DNS guard) are
// errors, as is an empty element.
func ParseTCPPorts(v string, have []uint16) ([]uint16, error) {
	out := append([]uint16(nil), have...)
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.ParseUint(f, 10, 16)
		if err != nil || n == 0 || f[0] == '+' {
			return nil, fmt.Errorf("%q is not a port (1-65535)", f)
		}
		switch n {
		case 80:
			return nil, fmt.Errorf("port 80 is redirected to the plain listener already")
		case 443, 53:
			return nil, fmt.Errorf("port %d is redirected already (443: HTTPS interception, 53: the DNS guard)", n)
		}
		for _, p := range out {
			if p == uint16(n) {
				return nil, fmt.Errorf("port %d given twice", n)
			}
		}
		out = append(out, uint16(n))
	}
	return out, nil
}

// FormatTCPPorts is the inverse of ParseTCPPorts.
func FormatTCPPorts(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}
