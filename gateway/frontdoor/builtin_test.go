package frontdoor_test

// The tests configure the driver kinds Toolgate ships with, as the
// toolgate binary does.
import _ "github.com/toolgate/toolgate/drivers/builtin"
