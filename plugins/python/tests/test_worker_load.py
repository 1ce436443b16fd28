"""The worker's app spec: MODULE[:CALLABLE], and application factories as
gunicorn takes them."""

import os
import sys
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from stickyd.worker import load  # noqa: E402


def _factory_module():
    m = types.ModuleType("factoryapp")

    def create_app(env="dev", debug=False):
        def app(environ, start_response):
            return [env.encode()]
        app.env, app.debug = env, debug
        return app

    def application(environ, start_response):
        return []

    def message(page, msg):
        return msg

    m.create_app, m.application, m.message = create_app, application, message
    m.not_a_function = 3
    return m


class LoadTest(unittest.TestCase):
    def setUp(self):
        sys.modules["factoryapp"] = _factory_module()

    def tearDown(self):
        sys.modules.pop("factoryapp", None)

    def test_callable_and_default(self):
        _, app, hooks = load("factoryapp")
        self.assertEqual(app.__name__, "application")
        self.assertIsNotNone(hooks.message)
        _, app, _ = load("factoryapp:application")
        self.assertEqual(app.__name__, "application")

    def test_factory_without_and_with_arguments(self):
        _, app, hooks = load("factoryapp:create_app()")
        self.assertEqual((app.env, app.debug), ("dev", False))
        self.assertIsNotNone(hooks.message, "the module's hooks are found for a factory's app too")
        _, app, _ = load("factoryapp:create_app('prod', debug=True)")
        self.assertEqual((app.env, app.debug), ("prod", True))

    def test_refusals_say_why(self):
        with self.assertRaisesRegex(ValueError, "literals"):
            load("factoryapp:create_app(os.environ)")
        with self.assertRaisesRegex(ValueError, "cannot read"):
            load("factoryapp:create_app(")
        with self.assertRaisesRegex(TypeError, "not a function to call"):
            load("factoryapp:not_a_function()")
        with self.assertRaisesRegex(TypeError, "not a WSGI callable"):
            load("factoryapp:not_a_function")


if __name__ == "__main__":
    unittest.main()
