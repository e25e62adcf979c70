// Package builtin registers the driver kinds Toolgate ships with. A
// program imports it for its side effect: each driver package registers
// its drivers.<name>.type, section, defaults and validation from its own
// init function, and nothing else in the program names a driver package.
// Adding a driver is its package plus one line here.
package builtin

import (
	_ "github.com/toolgate/toolgate/drivers/execbox"
	_ "github.com/toolgate/toolgate/drivers/tpmjs"
	_ "github.com/toolgate/toolgate/drivers/workspace"
)
