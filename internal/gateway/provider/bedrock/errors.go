package bedrock

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/provider/internal/translate"
)

// errorKinds classifies Bedrock Runtime's exceptions by their code.
var errorKinds = map[string]gateway.ErrorKind{
	"ThrottlingException":           gateway.KindRateLimited,
	"ModelNotReadyException":        gateway.KindOverloaded,
	"ServiceUnavailableException":   gateway.KindOverloaded,
	"ServiceQuotaExceededException": gateway.KindQuotaExceeded,
	"ValidationException":           gateway.KindBadRequest,
	"ResourceNotFoundException":     gateway.KindBadRequest,
	"ConflictException":             gateway.KindBadRequest,
	"AccessDeniedException":         gateway.KindAuth,
	"UnrecognizedClientException":   gateway.KindAuth,
	"InvalidSignatureException":     gateway.KindAuth,
	"ExpiredTokenException":         gateway.KindAuth,
	"IncompleteSignature":           gateway.KindAuth,
	"MissingAuthenticationToken":    gateway.KindAuth,
	"ModelTimeoutException":         gateway.KindTimeout,
	"InternalServerException":       gateway.KindServer,
	"ModelErrorException":           gateway.KindServer,
	"ModelStreamErrorException":     gateway.KindServer,
}

// errNoCredentials marks a failure to get credentials from the chain.
type errNoCredentials struct{ err error }

func (e errNoCredentials) Error() string { return "getting AWS credentials: " + e.err.Error() }
func (e errNoCredentials) Unwrap() error { return e.err }

// credentialsErrors marks the chain's failures, so that a call without
// credentials is an auth failure, not a network one.
type credentialsErrors struct{ aws.CredentialsProvider }

func (c credentialsErrors) Retrieve(ctx context.Context) (aws.Credentials, error) {
	creds, err := c.CredentialsProvider.Retrieve(ctx)
	if err != nil && ctx.Err() == nil {
		return creds, errNoCredentials{err}
	}
	return creds, err
}

// classify turns an error of the SDK, for a call under ctx, into the
// gateway's: an exception by its code (and HTTP status), missing
// credentials as auth, the caller's cancel as the context's error, the
// rest as a timeout or a network failure.
func classify(ctx context.Context, doing string, err error) error {
	if ctx.Err() == context.Canceled {
		return fmt.Errorf("%s: %w", doing, context.Canceled)
	}
	var status int
	var hs interface{ HTTPStatusCode() int }
	if errors.As(err, &hs) {
		status = hs.HTTPStatusCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		kind, ok := errorKinds[ae.ErrorCode()]
		if !ok {
			kind = statusKind(status, ae.ErrorFault())
		}
		return &gateway.ProviderError{Kind: kind, Status: status, Type: ae.ErrorCode(), Message: ae.ErrorMessage()}
	}
	var nc errNoCredentials
	if errors.As(err, &nc) {
		return &gateway.ProviderError{Kind: gateway.KindAuth, Message: nc.Error()}
	}
	if status != 0 {
		return &gateway.ProviderError{Kind: statusKind(status, smithy.FaultUnknown), Status: status, Message: err.Error()}
	}
	return translate.TransportError(ctx, doing, err)
}

// statusKind classifies an exception Bedrock did not document by its
// HTTP status, or by whose fault it says it is.
func statusKind(status int, fault smithy.ErrorFault) gateway.ErrorKind {
	switch {
	case status == 429:
		return gateway.KindRateLimited
	case status == 401 || status == 403:
		return gateway.KindAuth
	case status == 408:
		return gateway.KindTimeout
	case status == 503:
		return gateway.KindOverloaded
	case status >= 400 && status < 500, status == 0 && fault == smithy.FaultClient:
		return gateway.KindBadRequest
	}
	return gateway.KindServer
}
