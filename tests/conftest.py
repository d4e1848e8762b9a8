import pytest

from nodeprov.testing.exception_check import exception_check_fixture


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


check_public_api_exceptions = exception_check_fixture()
