// Generated from harness/determined/common/states.py by `python -m services.gateway.http.states_js`: do not edit.
// The experiment states the pages use and the changes between them.

export const EXPERIMENT_STATES = ["ACTIVE", "PAUSED", "STOPPING_COMPLETED", "STOPPING_CANCELED", "STOPPING_KILLED", "STOPPING_ERROR", "COMPLETED", "CANCELED", "ERROR", "DELETING", "DELETE_FAILED", "DELETED"];
export const TERMINAL_STATES = new Set(["CANCELED", "COMPLETED", "ERROR"]);
export const EXPERIMENT_DELETION_STATES = new Set(["DELETED", "DELETE_FAILED", "DELETING"]);

export const EXPERIMENT_TRANSITIONS = {
  ACTIVE: ["CANCELED", "COMPLETED", "ERROR", "PAUSED", "STOPPING_CANCELED", "STOPPING_COMPLETED", "STOPPING_ERROR", "STOPPING_KILLED"],
  PAUSED: ["ACTIVE", "CANCELED", "COMPLETED", "ERROR", "STOPPING_CANCELED", "STOPPING_ERROR", "STOPPING_KILLED"],
  STOPPING_COMPLETED: ["COMPLETED", "ERROR", "STOPPING_ERROR", "STOPPING_KILLED"],
  STOPPING_CANCELED: ["CANCELED", "ERROR", "STOPPING_ERROR", "STOPPING_KILLED"],
  STOPPING_KILLED: ["CANCELED", "ERROR", "STOPPING_ERROR"],
  STOPPING_ERROR: ["ERROR"],
  COMPLETED: ["DELETING"],
  CANCELED: ["DELETING"],
  ERROR: ["DELETING"],
  DELETING: ["DELETED", "DELETE_FAILED"],
  DELETE_FAILED: ["DELETING"],
  DELETED: [],
};

// Whether `current` may change to `next` under `transitions` (one of the maps above).
export function canTransition(transitions, current, next) {
  return (transitions[current] || []).includes(next);
}
