// Package bedrocktest speaks Bedrock Runtime's wire format for fake
// servers in tests (as net/http/httptest serves HTTP): its binary event
// stream (events and exceptions), its error answers, and the check of a
// request's SigV4 signature. It holds no fake's behaviour: each test's
// fake decides what to answer.
package bedrocktest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/smithy-go/eventstream"
)

// EventStreamType is the Content-Type of ConverseStream's answer.
const EventStreamType = "application/vnd.amazon.eventstream"

// WriteEvent writes one event of an event stream: its type
// ("messageStart", "contentBlockDelta"...) and its JSON payload.
func WriteEvent(w io.Writer, eventType string, payload any) error {
	b, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	var h eventstream.Headers
	h.Set(":message-type", eventstream.StringValue("event"))
	h.Set(":event-type", eventstream.StringValue(eventType))
	h.Set(":content-type", eventstream.StringValue("application/json"))
	return eventstream.NewEncoder().Encode(w, eventstream.Message{Headers: h, Payload: b})
}

// WriteException writes an exception event ("throttlingException",
// "modelStreamErrorException"...) with its message: the stream's end.
func WriteException(w io.Writer, exceptionType, message string) error {
	b, _ := json.Marshal(map[string]string{"message": message})
	var h eventstream.Headers
	h.Set(":message-type", eventstream.StringValue("exception"))
	h.Set(":exception-type", eventstream.StringValue(exceptionType))
	h.Set(":content-type", eventstream.StringValue("application/json"))
	return eventstream.NewEncoder().Encode(w, eventstream.Message{Headers: h, Payload: b})
}

// WriteError answers an error as Bedrock does: the status, the error's
// code in X-Amzn-ErrorType, its message in the JSON body.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", code+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	w.Header().Set("X-Amzn-RequestId", "req-error-1")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"message": message})
	w.Write(b)
}

// VerifySignature checks r's SigV4 signature (its Authorization header)
// against the credentials accessKey and secret: it signs the request
// again, over the headers the signature names and body, at the time it
// says, and compares. It returns the region and service signed for.
func VerifySignature(r *http.Request, body []byte, accessKey, secret string) (region, service string, err error) {
	auth := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return "", "", fmt.Errorf("not a SigV4 Authorization header: %q", auth)
	}
	fields := map[string]string{}
	for _, f := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[0] != accessKey || scope[4] != "aws4_request" {
		return "", "", fmt.Errorf("credential scope %q is not of key %s", fields["Credential"], accessKey)
	}
	region, service = scope[2], scope[3]
	when, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return "", "", fmt.Errorf("X-Amz-Date: %w", err)
	}
	again, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return "", "", err
	}
	for _, name := range strings.Split(fields["SignedHeaders"], ";") {
		if name == "host" {
			continue
		}
		for _, v := range r.Header.Values(name) {
			again.Header.Add(name, v)
		}
	}
	again.ContentLength = int64(len(body))
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: accessKey, SecretAccessKey: secret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hex.EncodeToString(sum[:]), service, region, when); err != nil {
		return "", "", err
	}
	if got := again.Header.Get("Authorization"); got != auth {
		return "", "", fmt.Errorf("signature does not match:\n got %s\nwant %s", auth, got)
	}
	return region, service, nil
}
