import dataclasses, os, sys, tempfile, unittest

sys.path.insert(0, "/app/inventory")
import stock  # noqa: E402


def write(text):
    fd, path = tempfile.mkstemp(suffix=".csv")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


class StockApi(unittest.TestCase):
    def setUp(self):
        self.path = write("# header\nX-9, 4, 1.05\n\nY-1,1,20\nZ-2 ,12, 0.5\n")

    def test_item_is_a_dataclass(self):
        self.assertTrue(dataclasses.is_dataclass(stock.Item))
        self.assertEqual([f.name for f in dataclasses.fields(stock.Item)], ["sku", "quantity", "unit_cents"])

    def test_parse_items(self):
        items = stock.parse_items(self.path)
        self.assertEqual(items, [stock.Item("X-9", 4, 105), stock.Item("Y-1", 1, 2000), stock.Item("Z-2", 12, 50)])

    def test_totals_and_low_stock(self):
        items = stock.parse_items(self.path)
        self.assertEqual(stock.total_cents(items), 4 * 105 + 2000 + 600)
        self.assertEqual(stock.low_stock(items, 5), ["X-9", "Y-1"])
        self.assertEqual(stock.low_stock(items, 1), [])

    def test_report_unchanged(self):
        self.assertEqual(stock.report(self.path), "30.20")
        self.assertEqual(stock.report("/app/inventory/stock.csv"), "17.40")

    def test_malformed_line_number(self):
        bad = write("A,1,1.00\n# c\nB,2\n")
        with self.assertRaises(ValueError) as ctx:
            stock.parse_items(bad)
        self.assertIn("3", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
