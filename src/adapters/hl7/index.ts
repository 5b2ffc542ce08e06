export { handleHl7Message, ackFor, type Hl7HandlerOptions, type Hl7Outcome, type Hl7Result } from './handle-message';
export { acknowledgements, buildAck, type Ack, type AckCode, type AckOptions, type Answer, type ApplicationAckCode, type CommitAckCode } from './ack';
export { readMessageHeader, messageControlId, DERIVED_CONTROL_ID_PREFIX, isEnhancedMode, ackConditions, type AckCondition, type MessageHeader } from './message-header';
export { parseHl7Message, Hl7Message, Hl7Segment } from './hl7-message';
export { splitMessages, segmentLines } from './split-messages';
export { loadHl7Mappings, profileFor, type Hl7Mappings, type Hl7Profile, type EventAction } from './profile';
export { InMemoryPatientInsuranceStore } from './memory-insurance-store';
export { Hl7InputError, describeLocation, describeProblem, describeProblems, ERROR_CODES, type Hl7Problem, type ErrorCode, type ProblemAckCode } from './hl7-errors';
export { createMessageHandler, type MessageHandlerOptions } from './message-handler';
