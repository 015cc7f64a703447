"""The sizes the cluster's parts must agree on: the one place they are written.

The CLI, the SDK and the harness check them before sending; the gateway and
the services again on receipt. An experiment config's own limits (its size,
depth and values) stay with the config model, in expconf/_limits.py, which
checks them while it parses.

=====================  =========  =================================================
limit                  value      what it bounds
=====================  =========  =================================================
MAX_MESSAGE_BYTES      128 MiB    one gRPC message, either way (Determined's)
MAX_CONTEXT_BYTES      95 MiB     a model-definition context, packed (Determined's)
MAX_EVENT_BYTES        8 MiB      one event: a local cluster's nats-server max_payload
MAX_COMMAND_BYTES      64 KiB     a command task's command line (`det cmd run`), UTF-8
MAX_TENSORBOARD_TRIALS 1000       the trials one TensorBoard shows
MAX_PUBLIC_KEY_BYTES   16 KiB     a shell's OpenSSH public key line
=====================  =========  =================================================
"""

MIB = 1024 * 1024
MAX_MESSAGE_BYTES = 128 * MIB
# Determined's rule: what a message holds once base64-encoded, less 1 MiB of room.
MAX_CONTEXT_BYTES = (MAX_MESSAGE_BYTES // 8) * 6 - MIB
MAX_EVENT_BYTES = 8 * MIB
MAX_COMMAND_BYTES = 64 * 1024
MAX_TENSORBOARD_TRIALS = 1000
MAX_PUBLIC_KEY_BYTES = 16 * 1024
