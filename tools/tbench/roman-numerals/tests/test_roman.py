import sys, unittest
sys.path.insert(0, "/app")
import roman  # noqa: E402


class Roman(unittest.TestCase):
    def test_known_values(self):
        for n, s in [(1, "I"), (4, "IV"), (9, "IX"), (14, "XIV"), (40, "XL"), (90, "XC"),
                     (400, "CD"), (1994, "MCMXCIV"), (2026, "MMXXVI"), (3999, "MMMCMXCIX")]:
            self.assertEqual(roman.to_roman(n), s)
            self.assertEqual(roman.from_roman(s), n)

    def test_round_trip(self):
        for n in range(1, 4000):
            self.assertEqual(roman.from_roman(roman.to_roman(n)), n)

    def test_bad_numbers(self):
        for bad in (0, 4000, -1, 2.0, True, "5", None):
            with self.assertRaises(ValueError):
                roman.to_roman(bad)

    def test_bad_strings(self):
        for bad in ("", "IIII", "IC", "mcm", "VX", "MMMM", "IIV", "XM", " X", "DD"):
            with self.assertRaises(ValueError):
                roman.from_roman(bad)


if __name__ == "__main__":
    unittest.main()
