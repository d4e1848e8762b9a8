"""Settings models with secrets: the base of providers' settings and agents' options."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Settings", "secret_field"]


def secret_field(**kwargs: Any) -> Any:
    """A settings ``Field`` whose value is a secret (credentials, tokens, an environment
    that may hold them): :meth:`Settings.storable` leaves it out and ``repr`` masks it, so
    it never reaches the store, logs or snapshots."""
    return Field(json_schema_extra={"secret": True}, **kwargs)


class Settings(BaseModel):
    """A frozen pydantic model that rejects unknown fields and knows its secret fields
    (declared with :func:`secret_field`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def secret_fields(cls) -> frozenset[str]:
        """Names of the fields declared with :func:`secret_field`."""
        return frozenset(
            name
            for name, info in cls.model_fields.items()
            if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("secret")
        )

    def secrets_set(self) -> list[str]:
        """The secret fields given explicitly (not left at their defaults), sorted."""
        return sorted(self.secret_fields() & self.model_fields_set)

    def storable(self) -> dict[str, Any]:
        """The fields given explicitly, less the secret ones, as JSON values: what may be
        written to a store and given back to the model."""
        return self.model_dump(mode="json", exclude_unset=True, exclude=set(self.secret_fields()))

    def __repr_args__(self) -> Any:
        secret = self.secret_fields()
        for name, value in super().__repr_args__():
            yield name, ("**secret**" if name in secret else value)
