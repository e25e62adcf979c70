package config

// The configurations the tests parse name the built-in driver kinds, which
// register themselves when their packages are linked.
import _ "github.com/toolgate/toolgate/drivers/builtin"
