"""The nodeprov CLI with the test doubles registered (the fake provider), for tests that run
it as a process of its own: a user's CLI never loads them. Run it as a script."""

from nodeprov.cli import main
from nodeprov.registry import register_provider
from nodeprov.testing.fake_provider import FakeProvider

register_provider("fake", FakeProvider)
main()
