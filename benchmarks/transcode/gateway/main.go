// The peer of the end-to-end transcoding benchmark
// (benchmarks/scripts/transcode_gateway.sh), in one binary:
//
//	bench upstream ADDR            the gRPC service: every method echoes its request
//	bench gateway ADDR UPSTREAM    grpc-gateway, generated for bench.proto, in front of it
//
// The gateway is grpc-gateway as its users run it: runtime.NewServeMux with
// its default marshaler, handlers registered from the endpoint.
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"wirespeed.dev/transcode-bench/gen"
)

type echo struct {
	gen.UnimplementedBenchServer
}

func (echo) EchoInt32S(_ context.Context, r *gen.Int32S) (*gen.Int32S, error)       { return r, nil }
func (echo) EchoDoubles(_ context.Context, r *gen.Doubles) (*gen.Doubles, error)    { return r, nil }
func (echo) EchoStrings(_ context.Context, r *gen.Strings) (*gen.Strings, error)    { return r, nil }
func (echo) EchoPayload(_ context.Context, r *gen.Payload) (*gen.Payload, error)    { return r, nil }
func (echo) EchoNested(_ context.Context, r *gen.Nested) (*gen.Nested, error)       { return r, nil }
func (echo) EchoDocument(_ context.Context, r *gen.Document) (*gen.Document, error) { return r, nil }
func (echo) Get(_ context.Context, r *gen.Lookup) (*gen.Lookup, error)              { return r, nil }
func (echo) GetOne(_ context.Context, r *gen.Lookup) (*gen.Lookup, error)           { return r, nil }
func (echo) GetMany(_ context.Context, r *gen.Many) (*gen.Many, error)              { return r, nil }
func (echo) GetDepth1(_ context.Context, r *gen.Lookup) (*gen.Lookup, error)        { return r, nil }
func (echo) GetDeep32(_ context.Context, r *gen.Lookup) (*gen.Lookup, error)        { return r, nil }
func (echo) GetDeep(_ context.Context, r *gen.Lookup) (*gen.Lookup, error)          { return r, nil }

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: bench upstream ADDR | bench gateway ADDR UPSTREAM")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "upstream":
		listener, err := net.Listen("tcp", os.Args[2])
		if err != nil {
			log.Fatal(err)
		}
		server := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
		gen.RegisterBenchServer(server, echo{})
		log.Printf("upstream listening on %s", listener.Addr())
		log.Fatal(server.Serve(listener))
	case "gateway":
		if len(os.Args) < 4 {
			log.Fatal("gateway ADDR UPSTREAM")
		}
		mux := runtime.NewServeMux()
		opts := []grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
		}
		if err := gen.RegisterBenchHandlerFromEndpoint(context.Background(), mux, os.Args[3], opts); err != nil {
			log.Fatal(err)
		}
		log.Printf("gateway listening on %s", os.Args[2])
		log.Fatal(http.ListenAndServe(os.Args[2], mux))
	default:
		log.Fatalf("unknown mode %q", os.Args[1])
	}
}
