"""Errors a user can act on. Each renders as one line; the CLI prints it and exits with code 2."""


class ReameError(Exception):
    """Base class for every error Reame reports to a user instead of a traceback."""


class ModelError(ReameError):
    """A GGUF file that Reame cannot load: names the file and the problem."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class TokenizerError(ReameError):
    """Tokenizer metadata in the GGUF is missing or inconsistent."""


class TemplateError(ReameError):
    """A chat template failed to render (syntax error or raise_exception in the template)."""


class ContextLengthError(ReameError):
    """A prompt plus the requested generation does not fit the model's context."""
