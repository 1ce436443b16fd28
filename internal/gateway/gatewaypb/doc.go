// Package gatewaypb is the gateway's gRPC API (service Gateway in
// gateway.proto) as protoc generates it: run `make proto` after editing the
// .proto, never edit the .pb.go files. It holds no logic: the server is
// internal/gateway/transport, over gateway.Service.
package gatewaypb
