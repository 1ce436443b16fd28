package agent

import "github.com/stickyd/stickyd/internal/keyring"

// Keyring and KeyringKey are GET /v1/operator/keyring's answer, owned by
// internal/keyring; the names stay for the API client's drift test.
type (
	Keyring    = keyring.Ring
	KeyringKey = keyring.Key
)
