package gateway

// The driver kinds this gateway can configure: each registers its
// drivers.<name>.type, section, defaults and validation from its own
// package. Adding a driver is its package plus one line here.
import (
	_ "github.com/toolgate/toolgate/drivers/execbox"
	_ "github.com/toolgate/toolgate/drivers/tpmjs"
	_ "github.com/toolgate/toolgate/drivers/workspace"
)
