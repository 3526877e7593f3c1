"""derive"""
