package evidence

import (
	"strconv"
	"strings"
)

// ParseGatewayName reads the gateway name records carry in their
// "gateway" field: "toolgate/<version>@<instance>", and, from a process
// holding the instance's lease (see package evidence/lease),
// "toolgate/<version>@<instance>#<epoch>". It returns the instance and the
// epoch, 0 when the name carries none (records written before instance
// leases, or by a gateway without one). A version never holds '@', so the
// instance starts after the first; an epoch is the decimal number after
// the last '#'. A name without '@' has no instance.
func ParseGatewayName(name string) (instance string, epoch uint64) {
	_, inst, ok := strings.Cut(name, "@")
	if !ok {
		return "", 0
	}
	i := strings.LastIndexByte(inst, '#')
	if i < 0 {
		return inst, 0
	}
	n, err := strconv.ParseUint(inst[i+1:], 10, 64)
	if err != nil || inst[i+1] == '0' {
		return inst, 0 // '#' is part of the instance name
	}
	return inst[:i], n
}

// GatewayNameWithEpoch is the gateway name a process holding epoch of its
// instance's lease writes into the records it owns: base
// ("toolgate/<version>@<instance>") and "#<epoch>".
func GatewayNameWithEpoch(base string, epoch uint64) string {
	if epoch == 0 {
		return base
	}
	return base + "#" + strconv.FormatUint(epoch, 10)
}

// ValidInstance checks that an instance name can stand as one key segment
// and in a checkpoint's origin line, which allows no spaces or '+'.
func ValidInstance(name string) error { return validInstance(name) }
