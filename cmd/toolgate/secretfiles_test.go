package main

import (
	"reflect"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/console"
	"github.com/toolgate/toolgate/internal/secretfile"
)

// TestEveryFileKeyDeclaresWhetherItIsSecret: every key of the
// configuration that names a file — of the gateway, of every driver kind
// and every front door this binary is built with — says whether the file
// holds a secret (`secret:"file"`, hidden from every sandbox) or not
// (`secret:"public"`). A section that grows a key file without saying so
// fails here rather than leaving the file readable to the shell.
func TestEveryFileKeyDeclaresWhetherItIsSecret(t *testing.T) {
	t.Parallel()
	undeclared := secretfile.Undeclared("", reflect.TypeFor[config.Config]())
	for _, typ := range drivers.KindTypes() {
		k, _ := drivers.LookupKind(typ)
		undeclared = append(undeclared, secretfile.Undeclared("drivers.<"+typ+">", reflect.TypeOf(k.New()))...)
	}
	undeclared = append(undeclared, secretfile.Undeclared("console", reflect.TypeFor[console.Config]())...)
	doors := frontdoor.Kinds()
	for _, name := range doors {
		c, _ := frontdoor.NewConfig(name)
		undeclared = append(undeclared, secretfile.Undeclared("front_doors."+name, reflect.TypeOf(c))...)
	}
	if len(doors) < 3 || len(drivers.KindTypes()) < 3 {
		t.Fatalf("this build has doors %v and drivers %v: the check needs them all", doors, drivers.KindTypes())
	}
	for _, key := range undeclared {
		t.Errorf("%s names a file but declares neither secret:\"file\" nor secret:\"public\"", key)
	}
}
