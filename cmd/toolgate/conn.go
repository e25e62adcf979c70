package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// connFlags are the flags every command that talks to a gateway takes.
type connFlags struct {
	addr    *string
	keyEnv  *string
	useTLS  *bool
	caFile  *string
	timeout *time.Duration
}

func addConnFlags(fs *flag.FlagSet) *connFlags {
	return &connFlags{
		addr:    fs.String("addr", "127.0.0.1:50051", "gateway `address`"),
		keyEnv:  fs.String("key-env", "", "environment `variable` holding the API key, sent as a Bearer token"),
		useTLS:  fs.Bool("tls", false, "connect with TLS (system roots unless --ca-file)"),
		caFile:  fs.String("ca-file", "", "PEM `file` of the CA that signed the gateway's certificate (implies --tls)"),
		timeout: fs.Duration("timeout", 5*time.Minute, "give up after this long"),
	}
}

// dial connects to the gateway and returns a client, a function that closes
// the connection, and ctx with the timeout and the API key attached.
func (f *connFlags) dial(ctx context.Context, getenv func(string) string) (toolgatev1.ToolGatewayClient, func(), context.Context, error) {
	if *f.keyEnv != "" {
		key := getenv(*f.keyEnv)
		if key == "" {
			return nil, nil, nil, fmt.Errorf("--key-env: environment variable %s is empty or unset", *f.keyEnv)
		}
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
	}
	creds := insecure.NewCredentials()
	switch {
	case *f.caFile != "":
		var err error
		if creds, err = credentials.NewClientTLSFromFile(*f.caFile, ""); err != nil {
			return nil, nil, nil, fmt.Errorf("--ca-file: %w", err)
		}
	case *f.useTLS:
		creds = credentials.NewTLS(nil)
	}
	conn, err := grpc.NewClient(*f.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	return toolgatev1.NewToolGatewayClient(conn), func() { cancel(); conn.Close() }, ctx, nil
}
