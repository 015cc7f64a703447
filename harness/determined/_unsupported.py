"""Stand-ins for the parts of Determined's training APIs that determined-es does not build
(DeepSpeed, PyTorch Lightning, Keras, TensorFlow, Estimator, batch inference).

Their modules still import, so that a script written for Determined fails at the line that
uses such a name, with a message that says what to use instead, rather than at its imports.
Using a stand-in in any way that would run framework code (calling it, constructing it,
subclassing it) raises NotImplementedError; naming it in a type annotation does not.
"""

from typing import Any, NoReturn


def unsupported(module: str, name: str, framework: str, alternative: str) -> type:
    """A stand-in for `module.name`, a public name of Determined's `framework` support.

    It is a class, so that both `Name(...)` and `class MyTrial(Name)` reach it: the first
    through `__new__`, the second through `__init_subclass__`.
    """
    message = f"determined-es does not support {framework} ({module}.{name}); {alternative}"

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(message)

    return type(
        name,
        (),
        {
            "__module__": module,
            "__doc__": f"Not supported: {message}.",
            "__new__": refuse,
            "__init_subclass__": classmethod(refuse),
        },
    )
