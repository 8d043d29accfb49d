package postgres

import (
	"os"
	"time"
)

// PlantEnv, set in a child test process, plants a bug: takeover after half
// the TTL (see TestSuiteCatchesEarlyTakeover).
const PlantEnv = "FENCE_PG_PLANT"

func init() {
	if os.Getenv(PlantEnv) == "early-takeover" {
		unrenewed = func(ttl time.Duration) time.Duration { return ttl / 2 }
	}
}

// ReplicationRisk is replicationRisk, for its table test.
var ReplicationRisk = replicationRisk
