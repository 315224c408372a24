package templates

import "github.com/nemorl/nemorl-slurm/stages"

// exitCodes is what the templates see as .Exit.
type exitCodes struct {
	ReservedMin, ReservedMax, PayloadReserved                                                       int
	InputsTampered, InputBad, OutputNotOwn, WeightsRejected, Isolation, SecretsMissing, OutputBound int
}

var scriptExits = exitCodes{
	ReservedMin: stages.ExitReservedMin, ReservedMax: stages.ExitReservedMax, PayloadReserved: stages.ExitPayloadReserved,
	InputsTampered: stages.ExitInputsTampered, InputBad: stages.ExitInputBad, OutputNotOwn: stages.ExitOutputNotOwn,
	WeightsRejected: stages.ExitWeightsRejected, Isolation: stages.ExitIsolation, SecretsMissing: stages.ExitSecretsMissing, OutputBound: stages.ExitOutputBound,
}
